-- benchmarks/php_ext/mix.lua — wrk script of the php_ext benchmark (run.py drives it): a copy of
-- benchmarks/coherent_cache/mix.lua whose writes are POST bid.php or, for a fraction
-- TIERCE_W_EDIT of them, POST edit.php (renames an item: item, category and seller versions + 1).
-- Parameters come from the environment (wrk's setup() runs before init(args)):
--   TIERCE_ADDRS   "host:port,host:port"  proxies; wrk thread i talks to proxy ((i-1) mod n)+1
--   TIERCE_MODE    mix | deps | seq
--     mix : GET item.php / category.php / user.php over the hot set (weights TIERCE_W_ITEM,
--           TIERCE_W_CAT, TIERCE_W_USER), plus TIERCE_WRITE (0..1) of POST bid.php
--     deps: GET deps.php?id=N&k=TIERCE_K over the hot items, plus TIERCE_WRITE of POST bid.php
--           on an item in 1..TIERCE_ITEMS+K-1
--     seq : warm-up; each thread walks the whole hot set of mix (or deps with TIERCE_K > 0)
--           in order, GETs only
--   TIERCE_ITEMS / TIERCE_CATS / TIERCE_USERS   hot-set sizes (ids 1..N)
--   TIERCE_W_EDIT  fraction (0..1) of the writes that are POST edit.php instead of bid.php
-- At the end it prints one line "TIERCE_RESULT {json}" with counts: reads/writes sent, responses by
-- kind, 200s, errors (non-200), cache hits seen as "X-Cache: HIT" (mod_cache), seq passes done.

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

local mode, items, cats, users, wfrac, k, wedit
local w_item, w_cat, w_user
-- globals (not local): done() reads them per thread with thread:get()
reads, writes, r_ok, w_ok, errors, hits = 0, 0, 0, 0, 0, 0
seq_i, seq_n, passes = 0, 0, 0
local seq_urls = {}
local read_hdrs = {}
local post_hdrs = { ["Content-Type"] = "application/x-www-form-urlencoded" }

function init(args)
  mode = env("TIERCE_MODE", "mix")
  items = tonumber(env("TIERCE_ITEMS", "2000"))
  cats = tonumber(env("TIERCE_CATS", "20"))
  users = tonumber(env("TIERCE_USERS", "1000"))
  wfrac = tonumber(env("TIERCE_WRITE", "0"))
  k = tonumber(env("TIERCE_K", "0"))
  wedit = tonumber(env("TIERCE_W_EDIT", "0"))
  w_item = tonumber(env("TIERCE_W_ITEM", "0.7"))
  w_cat = tonumber(env("TIERCE_W_CAT", "0.1"))
  w_user = tonumber(env("TIERCE_W_USER", "0.2"))
  math.randomseed(os.time() * 1000 + (tid or 0) * 7919 + math.floor(os.clock() * 1e6))
  if mode == "seq" then
    if k > 0 then
      for i = 1, items do table.insert(seq_urls, "/deps.php?id=" .. i .. "&k=" .. k) end
    else
      for i = 1, items do table.insert(seq_urls, "/item.php?id=" .. i) end
      for i = 1, cats do table.insert(seq_urls, "/category.php?id=" .. i) end
      for i = 1, users do table.insert(seq_urls, "/user.php?id=" .. i) end
    end
    seq_n = #seq_urls
  end
end

local function write_req()
  writes = writes + 1
  local top = items
  if mode == "deps" and k > 1 then top = items + k - 1 end
  if wedit > 0 and math.random() < wedit then
    local body = "item=" .. math.random(1, top) .. "&name=item+" .. math.random(1, 1000000)
        .. "&description=edited+by+the+php_ext+benchmark"
    return wrk.format("POST", "/edit.php", post_hdrs, body)
  end
  local body = "item=" .. math.random(1, top) .. "&user=" .. math.random(1, users)
      .. "&amount=" .. math.random(1, 100000) .. "." .. math.random(10, 99)
  return wrk.format("POST", "/bid.php", post_hdrs, body)
end

function request()
  if mode == "seq" then
    seq_i = seq_i + 1
    if seq_i > seq_n then seq_i = 1; passes = passes + 1 end
    reads = reads + 1
    return wrk.format("GET", seq_urls[seq_i], read_hdrs)
  end
  if wfrac > 0 and math.random() < wfrac then
    return write_req()
  end
  reads = reads + 1
  local path
  if mode == "deps" then
    path = "/deps.php?id=" .. math.random(1, items) .. "&k=" .. k
  else
    local x = math.random() * (w_item + w_cat + w_user)
    if x < w_item then
      path = "/item.php?id=" .. math.random(1, items)
    elseif x < w_item + w_cat then
      path = "/category.php?id=" .. math.random(1, cats)
    else
      path = "/user.php?id=" .. math.random(1, users)
    end
  end
  return wrk.format("GET", path, read_hdrs)
end

function response(status, headers, body)
  if status ~= 200 then
    errors = errors + 1
    return
  end
  -- an update answers text/plain "key=version" lines (mod_appversion strips Tierce-Invalidate);
  -- pages are text/html
  local ct = headers["Content-Type"] or ""
  if headers["Tierce-Invalidate"] ~= nil or string.sub(ct, 1, 10) == "text/plain" then
    w_ok = w_ok + 1
  else
    r_ok = r_ok + 1
    local xc = headers["X-Cache"]
    if xc ~= nil and string.sub(xc, 1, 3) == "HIT" then hits = hits + 1 end
  end
end

function done(summary, latency, requests)
  local t = { reads = 0, writes = 0, r_ok = 0, w_ok = 0, errors = 0, hits = 0, passes = 0 }
  for _, th in ipairs(threads) do
    for key, _ in pairs(t) do
      t[key] = t[key] + (tonumber(th:get(key)) or 0)
    end
  end
  local parts = {}
  for key, v in pairs(t) do table.insert(parts, string.format('"%s": %d', key, v)) end
  table.insert(parts, string.format('"duration_us": %d', summary.duration))
  table.insert(parts, string.format('"requests": %d', summary.requests))
  table.insert(parts, string.format('"p50_us": %d', latency:percentile(50)))
  table.insert(parts, string.format('"p99_us": %d', latency:percentile(99)))
  local e = summary.errors
  table.insert(parts, string.format('"sock_errors": %d', e.connect + e.read + e.write + e.timeout))
  io.write("TIERCE_RESULT {" .. table.concat(parts, ", ") .. "}\n")
end
